"""The clean room: the git repository where a series is applied (cleanroom.py), its journal
(journal.py, with the signed format every journal uses), the recovery of a killed run in it
(recovery.py) and the work-tree snapshot a capture takes (snapshot.py).
"""
