"""English number format (Django's own, spelled out so both portal languages are set here)."""

THOUSAND_SEPARATOR = ","
NUMBER_GROUPING = 3
DECIMAL_SEPARATOR = "."
