"""The clean room: the git repository where a series is applied (cleanroom.py), its journal
(journal.py) and the work-tree snapshot a capture takes (snapshot.py).
"""
