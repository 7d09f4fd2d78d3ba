//! kstatus: the Kubernetes status conventions (cli-utils kstatus) as a pure function. (Being written.)
