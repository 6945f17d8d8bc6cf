"""memabra.evals: off-policy estimators (``ope``), evaluation and training on the episode log
(``offline``), benchmarks (``bench``, ``simulator``) and MemPO (``mempo``). The subpackages are the
public surface; this package exports nothing itself."""

__all__: list[str] = []
