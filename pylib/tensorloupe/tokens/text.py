"""A tokenizer as the CLI prints it (`tensorloupe tokens`)."""

from __future__ import annotations

from ..display import counted, escaped


def print_header(doc: dict) -> None:
    print(f"Tokenizer ({doc['source']}: {doc.get('file') or ''})")
    for label in ("model", "pre", "size", "merges"):
        if doc.get(label) is not None:
            print(f"  {label:<10} {doc[label]:,}" if isinstance(doc[label], int) else f"  {label:<10} {doc[label]}")
    for label, s in doc.get("special", {}).items():
        print(f"  {label:<10} {s.get('id')}  {s.get('shown') if s.get('token') is not None else s.get('problem', '')}")


def print_encoding(doc: dict) -> None:
    """`tokens --encode` / `--decode`: the ids, each token made visible, the decoded text."""
    print_header(doc)
    if "ids" in doc:
        print(f"\nEncoded {counted(doc['characters'], 'character')} as {counted(doc['count'], 'token')}")
        print("  ids     " + ", ".join(map(str, doc["ids"])))
        print("  tokens  " + " ".join(f"[{p}]" for p in doc["pieces"]))
    if "text" in doc:
        print(f"\nDecoded {counted(len(doc['decode']), 'token')}:")
        print("  tokens  " + " ".join(f"[{p}]" for p in doc["decode_pieces"]))
        print("  text    " + escaped(doc["text"]))


def print_tokens(doc: dict) -> None:
    print_header(doc)
    template = doc.get("chat_template")
    if template:
        cut = " (truncated)" if template["truncated"] else ""
        print(f"  chat template: {template['length']:,} characters{cut}")
        for line in template["text"].splitlines()[:12]:
            print(f"    | {line}")
    rows = doc.get("tokens") if "tokens" in doc else doc.get("matches", [])
    if "find" in doc:
        more = " (more not shown)" if doc["truncated"] else f" (all {doc['scanned']:,} tokens searched)"
        print(f"\n{counted(len(rows), 'token')} matching {doc['find']!r}{more}")
    else:
        print(f"\nTokens {doc['start']:,}..{doc['start'] + doc['count'] - 1:,} of {doc['size']:,}")
    for e in rows:
        score = "" if e["score"] is None else f"{e['score']:g}"
        print(f"  {e['id']:>8}  {e['shown']:<24} {e['type'] or '':<12} {score}")
