"""Findings of today's engine (old) and the RE2 one (new) on the redaction test corpus."""
import sys, random, subprocess
from pathlib import Path
sys.path.insert(0, "/tmp/re2w")
from oldmod import old
import imprintd.secret_rules as new
from imprintd import redact as R
import tests.test_redact as TR
import tests.adversarial.test_secret_shapes as TS
import tests.test_secret_rules_bounds as TB
import re._constants as sre, re._parser as sre_parse

orules = old.load()
texts = []
texts += [t for t, _ in TR.TRUE_POSITIVES] + list(TR.FALSE_POSITIVES)
texts += [t for t, _ in TS.NAMED_SHAPES + TS.GITLEAKS_SAMPLES] + TS.ORDINARY_TEXT
texts += [s.replace("\n", e) for s in TB.CURL_FOUND + TB.CURL_LEFT for e in TB.LINE_ENDS.values()]
texts += list(TB._dense_corpora().values())
# seeded assignments of every keyword and curl commands (test_rules_searched_from_their_keywords...)
rng = random.Random(35); keywords = sorted({k for r in orules.rules for k in r.keywords})
token = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789"
for _ in range(800):
    lead = "".join(rng.choice(token + "_.-") for _ in range(rng.choice([0, 3, 30, 60])))
    value = "".join(rng.choice(token) for _ in range(rng.choice([8, 16, 20, 32, 36, 40, 43, 64])))
    operator = rng.choice(["=", ": ", " = '", '="', " => ", ":=", ",", ":"])
    t = f"x {lead}{rng.choice(keywords)}{rng.choice(['', '_id', ' token', '_secret_key'])}{operator}{value}"
    t += rng.choice(["", "'", '"', " ", ";", ". next"]) + rng.choice(["", f" {rng.choice(keywords)}={value}"])
    texts.append(t)
flags = [" -u ", " --user=", " -H ", " --header="]
values = ["adm1n:Pa55w0rdXyZq ", "'svc:Zk9pQ2xBbm5Z' ", '"Authorization: Basic dXNlcjpQYTU1dzByZFh5Wg==" ', "x "]
for _ in range(300):
    texts.append("".join(rng.choice(["curl", "xcurl", "curl -s"]) + " " + "y" * rng.choice([0, 5, 150, 390, 450])
        + rng.choice(["", "\n", "\r\n", "\n\n"]) + rng.choice(flags) + rng.choice(values) for _ in range(rng.randint(1, 6))))
# real-shaped tokens of every rule (the differential test's samples)
n_samples = 0
for number, rule in enumerate(orules.rules):
    for sample in TB._rule_samples(rule, 6, seed=number):
        m = rule.regex.search(sample)
        groups = [g for g in range(1, rule.regex.groups + 1) if m.group(g)]
        secret = m.group(rule.secret_group or (groups[0] if groups else 0))
        n_samples += 1
        for shown in {sample, secret}:
            texts += [f"notes\n{shown}\nmore", shown, f"token = {shown}", f'export X="{shown}"']
# bounded-rule mixes
bounded = [r for r in orules.rules if r.bounded]; bk = sorted({k for r in bounded for k in r.keywords})
rng = random.Random(46)
for _ in range(3000):
    pieces = []
    for _ in range(rng.randint(1, 12)):
        k = rng.choice(bk); k = rng.choice([k, k.upper(), k.capitalize()])
        v = "".join(rng.choice(token) for _ in range(rng.choice([20, 40, 64, 80])))
        pieces.append(rng.choice(["", " ", "k", "_", "-", "\n", "é", "9", "ey", "."]) + k + v)
        if k.lower() == "ey": pieces[-1] += ".ey" + v + "." + v[:12]
    texts.append("".join(pieces))
# curl tails mixes
pieces = ["curl", "curl ", "xcurl ", " -u ", " --user=", " -H ", "\t--header=", "adm1n:Pa55w0rdXyZq ", "x", " "]
pieces += ["'svc:Zk9pQ2xBbm5Z' ", '"Authorization: Basic dXNlcjpQYTU1dzByZFh5Wg==" ', "'X-Api-Key: Zk9pQ2xBbm5Z' "]
pieces += ["\n", "\n\n", "\n\n\n", "\r", "\r\n", "\n" * 9, "\n" * 10, "\n" * 11, "\n" * 12]
rng = random.Random(39)
for _ in range(4000):
    texts.append("".join(rng.choice(pieces) for _ in range(rng.randint(1, 30))))
# allowlist mixes (test_allowlists_checked_as_few_searches...)
generic = next(r for r in orules.rules if r.id == "generic-api-key")
import re
patterns = [p.pattern for a in (orules.allowlist, *generic.allowlists) for p in a.regexes]
words = sorted({w for p in patterns for w in re.findall(r"[A-Za-z_]{2,}", p)})
ap = [*words, *random.Random(0).sample(generic.allowlists[1].stopwords, 60), "key=", "api_key = ", "token: "]
ap += ["AKIA", "AIza", "hvs.", "password=", "x12y", "zz", "abCD", "Qq", "qqq", "K9", "é", "\u212a", ":jar:"]
ap += ["=\n", "\n", " ", "\t", "#", "'", '"', "=", "/usr/", "${", "$", "%", "{{", "}}", "@", "-", "_", "."]
ap += ["import { a } from 'b'", 'LICENSE = "MIT"', "--mount=type=secret,", "true", "aaaa", "AbCdEf0123456789"]
rng = random.Random(43)
def piece():
    if rng.random() < 0.4:
        name = rng.choice(["key=", "api_key = ", "token: ", "password=", "secret='", "AKIA", ""])
        value = "".join(rng.choice(token) for _ in range(rng.randint(8, 24)))
        return name + rng.choice(["", *ap[-20:]]) + value + rng.choice(["", " ", "\n", "'", ";"])
    return rng.choice(ap) + rng.choice(["", " "])
for _ in range(1500):
    t = "".join(piece() for _ in range(rng.randint(1, 60)))
    texts.append(rng.choice([t, t.upper(), t.lower()]))
# the repository's own files
root = Path("/work/wt/re2")
for name in subprocess.check_output(["git", "ls-files"], cwd=root, text=True).split():
    p = root / name
    if p.suffix in (".py", ".md", ".toml", ".ts", ".lua", ".json", ".txt") and p.is_file():
        try: texts.append(p.read_text(encoding="utf-8"))
        except UnicodeDecodeError: pass
print("texts", len(texts), "rule samples", n_samples)
import collections; kinds = collections.Counter(); diff = 0; total = 0
for t in texts:
    a, b = sorted(old.find(t, orules)), sorted(new.find(t))
    total += len(a)
    if a != b:
        diff += 1
        lost = [x for x in a if x not in b]; extra = [x for x in b if x not in a]
        kinds.update(("lost", r) for _,_,r in lost); kinds.update(("extra", r) for _,_,r in extra)
        if diff <= 0: print("DIFF", repr(t[:300]), "\n  old", [(t[s:e][:60], r) for s, e, r in a if (s, e, r) not in b], "\n  new", [(t[s:e][:60], r) for s, e, r in b if (s, e, r) not in a])
print(kinds); print("texts differing", diff, "old findings", total)
