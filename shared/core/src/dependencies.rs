//! `spec.dependsOn`: which dependencies hold an Application back, and cycles. (Being written.)
