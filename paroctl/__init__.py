"""paroctl: declarative profiles, units, switch and gates for a quantized-LLM inference box."""

__version__ = "0.1.0"
