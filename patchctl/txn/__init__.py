"""The series transaction: the session every writer runs in (session.py: locks, recovery,
staged writes), the series journal (journal.py) and the recovery of a killed clean-room run
(recovery.py).
"""
