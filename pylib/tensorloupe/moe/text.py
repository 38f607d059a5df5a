"""The Experts analysis as the CLI prints it (`tensorloupe moe`)."""

from __future__ import annotations

from ..display import counted, human_bytes


def print_moe(analysis) -> None:
    found = analysis.moe
    if not found.detected:
        print(f"No Mixture-of-Experts structure: {found.reason}.")
        return
    top_k = f"{found.top_k} (from {found.top_k_source})" if found.top_k else "unknown (no metadata says)"
    print(f"Mixture of Experts: {counted(len(found.layers), 'layer')}, {counted(found.expert_count, 'expert')}, top-k {top_k}")
    print(f"Redundancy from weights alone: {analysis.samples_per_matrix:,} elements per matrix per expert, "
          f"{human_bytes(analysis.bytes_read)} read; threshold {analysis.threshold}")
    for layer, measured in zip(found.layers, analysis.layers):
        router = ", ".join(layer.router) or "none found"
        kind = "stacked" if layer.stacked else "per-expert tensors"
        shared = f", shared: {counted(len(layer.shared), 'tensor')}" if layer.shared else ""
        print(f"\n{layer.prefix}: {counted(layer.expert_count, 'expert')} ({kind}), router {router}{shared}")
        print(f"  signature matrices: {', '.join(measured.matrices)}")
        experts = [p.expert for p in measured.experts]
        print("  cosine " + "".join(f"{e:>6}" for e in experts) + "   score")
        for profile, row in zip(measured.experts, measured.similarity):
            print(f"  {profile.expert:>6} " + "".join(f"{v:6.2f}" for v in row) + f"   {profile.score:.3f}")
        if measured.clusters:
            print("  near-duplicate clusters: " + "  ".join("{" + ", ".join(map(str, c)) + "}"
                                                         for c in measured.clusters))
        for r in measured.recommendations:
            print(f"  -> {r.text}")
        if not measured.recommendations:
            print("  no expert is redundant at this threshold")
