"""The upstream a series is pinned to: its sources (PyPI sdists, archives, git), the archive
reader, the pin of a typed upstream (pinning.py), the sdist format (sdist.py) and the tree cache.
"""
