"""transformer_pde: the helper library of the book *Transformers as PDEs*.

Modules (one mathematical object each):

- :mod:`~transformer_pde.attention`: velocity fields of the attention variants;
- :mod:`~transformer_pde.dynamics`: time integration of the particle system;
- :mod:`~transformer_pde.fitting`: power-law fits of rates;
- :mod:`~transformer_pde.plotting`: the house figure style and recurring plots.
"""

__version__ = "0.1.0"
