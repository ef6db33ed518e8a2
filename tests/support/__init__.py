"""Test helpers, importable as `support.<module>` (fixtures live in tests/conftest.py only).

files.py      the one file-map vocabulary (bytes | Link | Exe | None) and the content matrix
gitconfig.py  the one hostile git configuration and how to install it
repos.py      the one repository builder (new_repo), tree ids and diffs of file maps,
              a racy same-second edit
series.py     series directories and projects on fake upstreams
archives.py   tar archives, hostile members included
hostile/      the hostile-input matrix's builders (raw archive members, the sandbox with
              before/after snapshots; tests/test_hostile.py)
"""
