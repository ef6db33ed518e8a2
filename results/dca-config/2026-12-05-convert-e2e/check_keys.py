"""Read a converted GGUF with gguf-py and compare its DCA keys, key by key, with a published
dual_chunk_attention_config; print each key and value. Exit 1 on any difference.

    python check_keys.py GGUF PUBLISHED_CONFIG [EXPECTED_CONTEXT_LENGTH] [--absent]

With --absent every DCA key must be missing (a model converted without a DCA config). A
sparse_attention_config.json beside PUBLISHED_CONFIG is expected inside the GGUF's DCA config, as
vLLM merges it (with sparse_attention_enabled true unless the config says).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import gguf

absent = "--absent" in sys.argv
args = [a for a in sys.argv[1:] if a != "--absent"]
path, published = args[0], args[1]
want_ctx = int(args[2]) if len(args) > 2 else None
with open(published, encoding="utf-8") as f:
    dca = json.load(f)["dual_chunk_attention_config"]
sparse = Path(published).with_name("sparse_attention_config.json")
if sparse.is_file():
    with open(sparse, encoding="utf-8") as f:
        dca = {**dca, "sparse_attention_config": json.load(f)}
    dca.setdefault("sparse_attention_enabled", True)
fields = gguf.GGUFReader(path).fields
arch = fields["general.architecture"].contents()
want = {
    f"{arch}.attention.dca.{k}": dca[k]
    for k in ("chunk_size", "local_size", "original_max_position_embeddings")
}
bad = 0
if absent:
    present = sorted(k for k in fields if ".attention.dca." in k)
    print(f"{'ok  ' if not present else 'DIFF'} no {arch}.attention.dca.* key: {present or 'none'}")
    ctx = fields[f"{arch}.context_length"].contents()
    print(f"{'ok  ' if want_ctx in (None, ctx) else 'DIFF'} {arch}.context_length = {ctx}")
    sys.exit(1 if present or want_ctx not in (None, ctx) else 0)
for key, value in want.items():
    got = fields[key].contents() if key in fields else None
    ok = got == value
    bad += not ok
    print(f"{'ok  ' if ok else 'DIFF'} {key} = {got} (published {value})")
key = f"{arch}.attention.dca.config"
got_json = json.loads(fields[key].contents()) if key in fields else None
bad += got_json != dca
shown = fields[key].contents() if key in fields else None
print(f"{'ok  ' if got_json == dca else 'DIFF'} {key} = {shown}")
ctx = fields[f"{arch}.context_length"].contents()
if want_ctx is not None:
    bad += ctx != want_ctx
print(f"{'ok  ' if want_ctx in (None, ctx) else 'DIFF'} {arch}.context_length = {ctx}")
sys.exit(1 if bad else 0)
