"""The model catalog: capabilities and prices, bundled and from genai-prices, and the
registry rows they fill.
"""
