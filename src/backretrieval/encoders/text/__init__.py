"""Text models: each module registers the text encoders it provides."""
