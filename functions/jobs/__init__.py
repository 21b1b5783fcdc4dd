"""The Vertex CustomJob a request becomes — pools, Reduction Server, cost, labels — and the operator's guardrails on
it."""
