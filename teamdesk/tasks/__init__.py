"""The background machinery, one module per concept of the book (ch. 23–30)."""
