#!/usr/bin/env python3
"""Carry large files to the GPU device machine in as few calls as possible.

A device call uploads at most 64 MiB, the repository's tracked files included, so models and the
upstream sdist travel in chunks. Splitting each file on its own wastes most of a call on the last
part of every file; this tool packs the files as ONE byte stream cut into fixed-size chunks, in the
order given, so the first files (the sdist the build needs) arrive in the first calls and each
call is full.

  ferry.py pack OUTDIR [--chunk-mib N] FILE...
      OUTDIR/cNN/chunk (one folder per call, to name in `carry`) and OUTDIR/manifest.json
      (every file's name, size, offset and sha256), written to c00/ too
  ferry.py unpack STAGE DEST
      on the device: rebuild into DEST every file whose chunks are all in STAGE (chunks copied
      there as cNN, with manifest.json), checking each sha256; prints what is complete and what
      is still missing
"""
from __future__ import annotations

import argparse
import hashlib
import json
import shutil
import sys
from pathlib import Path

BLOCK = 1 << 20


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(BLOCK):
            h.update(block)
    return h.hexdigest()


def pack(outdir: Path, files: list[Path], chunk: int) -> dict[str, object]:
    entries, offset = [], 0
    for f in files:
        size = f.stat().st_size
        entries.append({"name": f.name, "size": size, "offset": offset, "sha256": _sha256(f)})
        offset += size
    manifest: dict[str, object] = {"chunk": chunk, "total": offset, "files": entries,
                                   "chunks": (offset + chunk - 1) // chunk}
    outdir.mkdir(parents=True, exist_ok=True)
    index, written, out = 0, 0, None
    for f in files:
        with f.open("rb") as src:
            while block := src.read(min(BLOCK, chunk)):
                while block:
                    if out is None:
                        (outdir / f"c{index:02d}").mkdir(exist_ok=True)
                        out = (outdir / f"c{index:02d}" / "chunk").open("wb")
                    take = block[: chunk - written]
                    out.write(take)
                    written += len(take)
                    block = block[len(take):]
                    if written == chunk:
                        out.close()
                        out, written, index = None, 0, index + 1
    if out is not None:
        out.close()
    text = json.dumps(manifest, indent=1)
    (outdir / "manifest.json").write_text(text)
    (outdir / "c00" / "manifest.json").write_text(text)
    return manifest


def _read_range(stage: Path, chunk: int, start: int, size: int, dst: Path) -> bool:
    """Copy bytes [start, start + size) of the stream into dst; False (nothing written) when one of
    its chunks is not staged yet, so a call that adds one chunk does not rewrite a partial file."""
    parts = range(start // chunk, (start + size - 1) // chunk + 1) if size else range(0)
    if any(not (stage / f"c{i:02d}").exists() for i in parts):
        return False
    with dst.open("wb") as out:
        pos, end = start, start + size
        while pos < end:
            part = stage / f"c{pos // chunk:02d}"
            if not part.exists():
                return False
            with part.open("rb") as f:
                f.seek(pos % chunk)
                data = f.read(min(end - pos, chunk - pos % chunk))
            out.write(data)
            pos += len(data)
    return True


def unpack(stage: Path, dest: Path) -> int:
    manifest = json.loads((stage / "manifest.json").read_text())
    dest.mkdir(parents=True, exist_ok=True)
    missing = 0
    for e in manifest["files"]:
        target = dest / e["name"]
        if target.exists() and target.stat().st_size == e["size"]:
            print(f"have     {e['name']}")
            continue
        tmp = target.with_suffix(target.suffix + ".part")
        if not _read_range(stage, manifest["chunk"], e["offset"], e["size"], tmp):
            tmp.unlink(missing_ok=True)
            print(f"missing  {e['name']} (chunks not all here yet)")
            missing += 1
            continue
        if _sha256(tmp) != e["sha256"]:
            tmp.unlink()
            print(f"BAD      {e['name']}: sha256 differs from the manifest", file=sys.stderr)
            return 2
        shutil.move(tmp, target)
        print(f"complete {e['name']} sha256 {e['sha256']}")
    return 1 if missing else 0


def main() -> int:
    ap = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("pack")
    p.add_argument("outdir", type=Path)
    p.add_argument("files", type=Path, nargs="+")
    p.add_argument("--chunk-mib", type=int, default=40)
    u = sub.add_parser("unpack")
    u.add_argument("stage", type=Path)
    u.add_argument("dest", type=Path)
    a = ap.parse_args()
    if a.cmd == "pack":
        m = pack(a.outdir, a.files, a.chunk_mib << 20)
        print(json.dumps({"chunks": m["chunks"], "total": m["total"]}))
        return 0
    return unpack(a.stage, a.dest)


if __name__ == "__main__":
    sys.exit(main())
