"""Load balancers: the API (resources), what each node gets (targets), and nginx on the node (nginx, node)."""
