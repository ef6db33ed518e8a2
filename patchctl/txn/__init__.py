"""The series transaction: the session every writer runs in (session.py: locks, recovery of a
killed run, staged writes) and the series journal (journal.py).
"""
