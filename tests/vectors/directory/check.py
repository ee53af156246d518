#!/usr/bin/env python3
"""Checks corpus.json and queries.json and prints the counts quoted in README.md."""
import collections, json, os, re, sys

here = os.path.dirname(os.path.abspath(__file__))
corpus = json.load(open(os.path.join(here, "corpus.json"), encoding="utf-8"))
queries = json.load(open(os.path.join(here, "queries.json"), encoding="utf-8"))
errors = []
def need(ok, msg):
    if not ok:
        errors.append(msg)

recs = corpus["records"]
need(len(recs) >= 320, f"{len(recs)} records < 320")
need([r["id"] for r in recs] == [f"c{i:04d}" for i in range(1, len(recs) + 1)], "record ids not c0001.. in order")
need(len({r["name"] for r in recs}) == len(recs), "duplicate names")
domains = collections.Counter(r["domain"] for r in recs)
need(len(domains) >= 25, f"{len(domains)} domains < 25")
need(max(domains.values()) <= 0.08 * len(recs), f"a domain has > 8%: {domains.most_common(1)}")
for r in recs:
    n = len(r["description"].split())
    need(12 <= n <= 40, f"{r['id']}: description has {n} words")
    caps = r["capabilities"]
    need(1 <= len(caps) <= 4, f"{r['id']}: {len(caps)} capabilities")
    need(all(re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", c) for c in caps), f"{r['id']}: capability not kebab-case")

qs = queries["queries"]
ids = {r["id"] for r in recs}
descs = [r["description"].lower() for r in recs]
need(len(qs) >= 70, f"{len(qs)} queries < 70")
need([q["id"] for q in qs] == [f"q{i:03d}" for i in range(1, len(qs) + 1)], "query ids not q001.. in order")
styles = collections.Counter(q["style"] for q in qs)
need(set(styles) <= {"keyword", "paraphrase", "task"}, f"unknown style in {styles}")
grades = collections.Counter()
for q in qs:
    rel = q["relevance"]
    need(all(k in ids for k in rel), f"{q['id']}: judged id not in corpus")
    need(all(g in (1, 2, 3) for g in rel.values()), f"{q['id']}: grade outside 1..3")
    need(3 in rel.values(), f"{q['id']}: no grade-3 record")
    grades.update(rel.values())
    words = re.findall(r"[a-z0-9']+", q["query"].lower())
    if q["style"] == "task":
        need(10 <= len(words) <= 25, f"{q['id']}: task query has {len(words)} words")
    for i in range(len(words) - 4):  # no 5-word run copied from a description
        need(not any(" ".join(words[i:i + 5]) in d for d in descs), f"{q['id']}: copies a description")

for path in ("corpus.json", "queries.json", "README.md"):
    text = open(os.path.join(here, path), encoding="utf-8").read()
    need(not re.search(r"[ \t]+$", text, re.M), f"{path}: trailing whitespace")

print(f"records {len(recs)}, domains {len(domains)} (largest {domains.most_common(1)[0][1]} records, "
      f"{100 * domains.most_common(1)[0][1] / len(recs):.1f} %)")
print(f"queries {len(qs)}: " + ", ".join(f"{s} {styles[s]}" for s in ("keyword", "paraphrase", "task")))
print(f"judged pairs {sum(grades.values())}: grade 3 {grades[3]}, grade 2 {grades[2]}, grade 1 {grades[1]}; "
      f"judged per query {min(len(q['relevance']) for q in qs)}..{max(len(q['relevance']) for q in qs)}")
for e in errors:
    print("ERROR:", e)
sys.exit(1 if errors else 0)
