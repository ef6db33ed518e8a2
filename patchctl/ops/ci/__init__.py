"""`patchctl ci`: the gate over the other commands (gate.py) and its findings (findings.py)."""
