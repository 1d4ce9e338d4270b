"""``make scale-proof``: the production shape of the machine over hosts made of network
namespaces, under load, with an ingress replica and the code server killed (docs/scale.md)."""
