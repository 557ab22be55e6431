"""transformer_pde: the helper library of the book *Transformers as PDEs*.

Modules (one mathematical object each):

- :mod:`~transformer_pde.attention`: velocity fields of the attention variants;
- :mod:`~transformer_pde.dynamics`: time integration of the particle system;
- :mod:`~transformer_pde.transport`: Wasserstein distances (exact, sliced, conditional)
  through POT;
- :mod:`~transformer_pde.stability`: Gronwall rates and the flow Jacobian of the particle system;
- :mod:`~transformer_pde.meanfield`: when the Monte Carlo error of softmax attention has finite
  variance (Gaussian data);
- :mod:`~transformer_pde.gaussian`: mean and covariance ODEs of Gaussian solutions;
- :mod:`~transformer_pde.symbolic`: the SymPy derivations behind them;
- :mod:`~transformer_pde.lipschitz`: Jacobian-vector products, local Lipschitz constants,
  published bounds;
- :mod:`~transformer_pde.pretrained`: all-MiniLM-L6-v2 (BERT) run in NumPy;
- :mod:`~transformer_pde.masked`: mean-field masked (causal) attention on [0,1] x R^d;
- :mod:`~transformer_pde.sphere`: dynamics on the unit sphere (layer normalisation);
- :mod:`~transformer_pde.fitting`: power-law fits of rates;
- :mod:`~transformer_pde.plotting`: the house figure style and recurring plots.
"""

__version__ = "0.1.0"
