"""Who a caller is: bearer tokens verified to an identity, below every route."""
