"""`patchctl cleanroom apply` (apply.py) and `patchctl cleanroom status` (status.py)."""
