"""Image models (the paper's ``g``): each model module registers the image models it provides; ``batching`` and ``cnn`` are the shared image loading and the CNN feature-extractor backend."""
