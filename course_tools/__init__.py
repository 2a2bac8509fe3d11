"""The maintainers' room: what keeps the course built, translated, measured and shipped.

Nothing here is imported by a lesson. ``python -m course_tools COMMAND`` runs each tool
(``course_tools/__main__.py`` lists them): the Japanese edition (``translation/``), the lessons'
time lines (``lesson_plan``), slides (``slides``, with ``slides_assets/``), re-executing
notebooks (``refresh``), the table runners (``security_table``, ``kiosk_table``), the offline
bundle (``bundle``) and the benchmarks (``benchmarks/``). It may import every other room.
"""
