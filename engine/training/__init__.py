"""The Trainer loop and the components it consults, each owning its config, state and policy."""
