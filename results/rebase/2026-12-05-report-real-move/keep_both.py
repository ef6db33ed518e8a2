"""Resolve every diff3 conflict block of the named files by keeping ours, then theirs."""

import sys
from pathlib import Path

for name in sys.argv[1:]:
    path, out, side = Path(name), [], None
    for line in path.read_bytes().splitlines(keepends=True):
        if line.startswith(b"<<<<<<< "):
            side = "ours"
        elif side and line.startswith(b"||||||| "):
            side = "base"
        elif side and line.rstrip(b"\r\n") == b"=======":
            side = "theirs"
        elif side and line.startswith(b">>>>>>> "):
            side = None
        elif side != "base":
            out.append(line)
    path.write_bytes(b"".join(out))
