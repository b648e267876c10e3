"""pytimely: timely dataflow for Python."""
from .order import Product, ProductSummary

__all__ = ["Product", "ProductSummary"]
