"""DAG templates, one package per application (``champion_challenger``, ``zone_training``)."""

__all__: list[str] = []
