"""`patchctl rebase`: the rebase itself (rebase.py) and its own journal (state.py)."""
