"""Statistics: intervals and the one paired gap (``stats``), the verdicts' arithmetic
(``verdicts``), loss-gap curves and token multipliers (``gaps``), and how often an interval
rule covers (``coverage``)."""
