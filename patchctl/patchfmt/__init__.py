"""Patch bytes read without running anything: the parser (parse.py) and the sizes that binary
hunks declare (binary.py). Pure functions over bytes; only the base modules below.
"""
