"""The results store and the reports drawn from it."""
