"""Tools of the checkout, not shipped in the wheel: ``make demo``'s runner."""
