"""core layer of the operator (see STYLE.md)."""
