"""The series: series.yaml's model and loader (model.py), a stack of series (stack.py), the
project root (project.py), markers, patch files (patchfile.py: bytes from trees; parts.py:
header/diff/trailer), `git apply` of patch bytes (gitapply.py) and the generated docs (docs.py).
"""
