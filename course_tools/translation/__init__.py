"""The translated editions of the course (the Japanese one, ``ja``), made from the English.

Nobody edits a Japanese notebook. Each English file has a *catalogue*, the translation of
each of its units, and the Japanese files are built from the two::

    notebooks/03_tool_calls.ipynb  +  translations/ja/notebooks/03_tool_calls.md  ->  notebooks/ja/03_tool_calls.ipynb
    exercises/03_tool_calls.ipynb  +  translations/ja/exercises/03_tool_calls.md  ->  exercises/ja/03_tool_calls.ipynb
    README.md                      +  translations/ja/README.md                   ->  README.ja.md

Each translation records the hash of the English text it was made from, so that a change
to the English makes it *stale*, visibly, instead of leaving an old translation in place.

    python -m course_tools translation status ja        # per file: the missing, stale and orphan units (exit 1 if any)
    python -m course_tools translation status ja --show # ... with the English to translate (a diff, for a stale one)
    python -m course_tools translation build ja         # write the Japanese files (refuses while a unit is not current)
    python -m course_tools translation build ja --check   # only say which Japanese files are out of date (CI)
    python -m course_tools translation build ja --allow-english   # work in progress: English, under a notice
    python -m course_tools translation adopt ja           # copy translations the memory found to where they belong
    python -m course_tools translation messages ja        # the check messages still to translate, as catalogue lines
    python -m course_tools translation export ja --po DIR # the catalogues as PO files, for a translator's tools
    python -m course_tools translation import ja --po DIR # ... and their translated entries back

The modules, one idea each: ``units`` (what is translated, and its hash), ``catalogue`` (the
catalogue's format, read strictly), ``sources`` (which file goes where), ``status`` (current,
stale, missing, orphan; the translation memory and ``adopt``), ``history`` (the English a
stale translation was made from), ``links`` (relative links from another folder), ``build``
(the built files), ``messages`` (the check messages, translated when shown), ``po`` (the
exchange with gettext's tools: PO files out and back, a stale unit ``fuzzy``).
"""
