"""The near ties of one sparse-prefill reference case and what taking the other side does.

usage: python near_tie_flip.py ARCH ATTN UBATCH SEED GAP MODELS_DIR LLAMA_SRC
(run from anywhere; imports the repository's tests/evals/dca). For each near tie within GAP of
the float64 reference's selection (test_sparse_prefill's budgets, h2k1 model, prompt seed SEED):
the relative logit change of keeping the other side ("flip") and of keeping the best surely
dropped candidate instead ("outside"); then forward_matching on logits made with the first flip.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
from tests.evals.dca import reference as ref  # noqa: E402
from tests.evals.dca import test_sparse_prefill as tsp  # noqa: E402
from tests.evals.dca.model_runs import random_tokens  # noqa: E402
from tests.evals.dca.tiny_models import TinyModels, tokenizer_for  # noqa: E402

arch, attn, ub, seed, gap = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
md = TinyModels(Path(sys.argv[6]), tokenizer_for(Path(sys.argv[7])))
m = ref.load_model(tsp._heads_model(md, arch, "h2k1"))
cfg = ref.SparseConfig(vertical=tsp.VERTICAL, slash=tsp.SLASH, last_q=tsp.LAST_Q, ubatch=ub)
run = tsp._run_config(attn, cfg)
toks = random_tokens(tsp.N_TOKENS, seed)


def fw(picks):
    tc = ref.TieChoices(gap, picks)
    return ref.forward(m, toks, ref.replace(run, sparse=ref.replace(cfg, ties=tc))), tc.ties


want, ties = fw({})
print("near ties (site = layer, ubatch start, part, group, v/s; tied; kept; outside):")
print([(t.site, t.tied, t.n, t.outside) for t in ties])
for t in ties:
    for c in t.choices()[1:]:
        alt, _ = fw({t.site: c})
        print("flip", t.site, c, ref.rel_err(alt, want))
    wrong, _ = fw({t.site: (t.outside,) + t.tied[: t.n - 1]})
    print("outside", t.site, ref.rel_err(wrong, want))
t0 = time.time()
alt, _ = fw({ties[0].site: ties[0].choices()[1]})
got, picks = ref.forward_matching(m, toks, run, alt, gap)
print("matched", picks, ref.rel_err(got, alt), f"{time.time() - t0:.1f} s")
