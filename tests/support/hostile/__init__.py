"""Builders for the hostile-input matrix (tests/test_hostile.py): archives, sandboxes, mboxes.

Each builder makes a real input the way an attacker would (raw tar/zip members, raw mbox
bytes), and `Sandbox` takes before/after snapshots of a directory holding the project, the
cache and victim files around them, so every case can prove nothing outside the allowed
directories changed.
"""
