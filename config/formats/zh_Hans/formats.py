"""Simplified Chinese number format as CLDR gives it (#,##0.00: groups of three, a comma)
instead of Django's default for zh_Hans (groups of four without a separator). Everything
else (dates) comes from Django's zh_Hans formats."""

THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
DECIMAL_SEPARATOR = "."
