"""The switch protocol, its journal, recovery, adoption and promotion."""
