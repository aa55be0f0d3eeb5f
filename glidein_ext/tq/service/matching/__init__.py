"""Matching a pilot to tasks (Hasham 2011 §IV-E): the ``matcher`` (pure, in memory) over match
groups (``match_groups``) evaluated in batches (``match_batches``, ``batched``, ``columns``), the
compiled subset of ClassAd expressions (``classad_parse``, ``classad_values``, ``compiled``), the
costly expressions evaluated with a budget (``costly``) and a pool's several candidates
(``match_several``)."""
