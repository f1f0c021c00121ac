"""Scripts that run other frameworks' training in the cockpit; the tests drive them."""
