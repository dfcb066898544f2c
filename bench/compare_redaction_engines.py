"""Today's secret_rules (old, Python re) and the RE2 one (new), side by side in one process:
CPU seconds a megabyte of each density of bench/bench_redact.py (best of 3 and the first run),
for redact() and the rule set alone, with the ratio to prose; and bench_hostile_text's
redaction cases at 67,000 and 268,000 characters."""
import sys, time
sys.path.insert(0, "/work/wt/re2")
# Today's engine: `git show main:imprintd/secret_rules.py > /tmp/re2w/old_secret_rules.py`.
import importlib.util
from pathlib import Path
spec = importlib.util.spec_from_file_location("old_secret_rules", "/tmp/re2w/old_secret_rules.py")
old = importlib.util.module_from_spec(spec); sys.modules["old_secret_rules"] = old; spec.loader.exec_module(old)
old._DATA = Path(__file__).resolve().parent.parent / "imprintd" / "data" / "gitleaks.toml"
import imprintd.secret_rules as new
from imprintd import redact as R
from bench import bench_redact as BR, bench_hostile_text as BH
new_find = new.find
old.load(); new.load()
ENG = {"old": lambda t: old.find(t), "new": new_find}
def use(name): new.find = ENG[name]
def run(f, n=3):
    ts = []
    for _ in range(n):
        R._redact_remembered.cache_clear(); s = time.process_time(); f(); ts.append(time.process_time() - s)
    return ts[0], min(ts)
texts = {"prose (baseline)": BR.sized(BR.PROSE, 1_000_000), **{k: BR.sized(u, 1_000_000) for k, u in BR.densities().items()}}
res = {}
for name, t in texts.items():
    row = {}
    for eng in ("old", "new"):
        use(eng)
        row[eng, "redact"] = run(lambda: R.redact(t))
        row[eng, "rules"] = run(lambda: list(ENG[eng](t)))
        row[eng, "out"] = R.redact(t)
    res[name] = row
    print(name, {k: v for k, v in row.items() if k[1] != "out"}, "same output:", row["old", "out"] == row["new", "out"], flush=True)
base = res["prose (baseline)"]
print(f"\n{'1 MB of':30s} | {'redact old':>16s} {'redact new':>16s} | {'rules old':>16s} {'rules new':>16s} | new/old rules, first run rules old/new")
for name, row in res.items():
    cells = []
    for col in ("redact", "rules"):
        for eng in ("old", "new"):
            b = row[eng, col][1]; cells.append(f"{b:6.3f} ({b / base[eng, col][1]:5.1f}x)")
    print(f"{name:30s} | {cells[0]:>16s} {cells[1]:>16s} | {cells[2]:>16s} {cells[3]:>16s} | {row['new','rules'][1]/row['old','rules'][1]:5.2f}  {row['old','rules'][0]:.3f}/{row['new','rules'][0]:.3f}")
print("\nbench_hostile_text redaction cases: 67,000 / 268,000 characters, CPU s (best of 3)")
for name, (f, unit) in BH.CASES.items():
    if not name.startswith("redaction"): continue
    small, large = BH.sized(unit, 67_000), BH.sized(unit, 268_000)
    out = []
    for eng in ("old", "new"):
        use(eng)
        a = run(lambda: f(small))[1]; b = run(lambda: f(large))[1]; out.append(f"{eng} {a:.3f} {b:.3f} ({b/max(a,1e-9):.1f})")
    print(f"  {name:45s} " + " | ".join(out), flush=True)
