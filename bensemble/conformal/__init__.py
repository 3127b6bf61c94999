"""conformal."""
