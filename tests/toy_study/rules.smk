# The toy study has no jobs of its own: data, training and evaluation are the core's rules, its notebook comes
# from study.yaml.
