"""What operators see: one task in full and why a queued task waits (``insight``), stuck-work
warnings (``stuck``, pure), ``/metrics`` (``metrics``) and the operators' calls that show them
(``ops``).  The run's counters (``tq.service.counters``) are fed by the store and stay beside it."""
