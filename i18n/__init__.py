"""Text that is worded once in English and said again in the reader's language.

The lowest package of the project, importing nothing of Tidegate: the admission engine,
billing and tenants word their messages with one type (:mod:`i18n.wording`, pure
Python), and the portal and the API say them in the reader's language
(:mod:`i18n.said`, with Django's translations)."""
