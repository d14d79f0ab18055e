"""Online classification with drift and jumps (thesis §3.5.1, E3.3; spec/bone.md §4 "Chapter 3").

**Stream** (eq. 3.63; the authors' notebook for what the thesis leaves open: ``T = 720``,
``x ~ U[−3, 3]²``, Gaussian drift)::

    θ_0 ~ U[−2, 2]²
    θ_t = θ_{t−1} + N(0, 0.01² I₂)   w.p. 1 − p_ε,      θ_t ~ U[−2, 2]²   w.p. p_ε = 0.01
    x_t ~ U[−3, 3]²,   y_t ~ Bern(σ(θ_tᵀ x_t))

Model, methods (C-ACI, CPP-OU, RL[1]-PR, RL[1]-OUPR*, the RL[K]-PR sweep over ``K`` and ``π``),
tuning on one warm-up stream, and the prequential misclassification metric: exactly as
:mod:`skfilter.benchmarks.bocd_drift` (same code). The authors' notebooks report the mean test
misclassification over 100 runs OUPR* 0.235, C-ACI 0.235, CPP-OU 0.236, RL[1]-PR 0.392 (thesis:
"C-ACI, CPP-OU and RL[1]-OUPR* comparable, RL[1]-PR worst"; Fig. 3.8).

Run as ``python -m skfilter.benchmarks bocd-jumps``; the table goes to ``--out``/bocd_jumps_table.md.
"""

from __future__ import annotations

from .bocd_drift import _main, add_arguments  # noqa: F401  (the command's options)

HELP = "BOCD/BONE: online classification with drift and jumps (thesis E3.3)"


def main(args) -> int:
    """Run the drift-and-jumps benchmark (module docstring)."""
    return _main(args, "jumps")
