"""The math side: a spec's reference semantics and the fp64 proof of it (``coda check --math``).

``reference`` interprets a spec's steps in fp64 (and in the low-precision pipeline), ``inputs``
draws a spec's random inputs, ``equivalence`` evaluates the unfused ``equivalent_to`` math,
``coverage`` checks what the drawn inputs exercised, and ``mathcheck`` runs the proof. Where this
package sits among the others: docs/architecture.md.
"""
