"""Text that is worded once in English and said again in the reader's language.

The lowest package of the project: pure Python, importing nothing of Tidegate, so the
admission engine, billing and tenants word their messages with one type
(:mod:`i18n.wording`)."""
