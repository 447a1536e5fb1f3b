//! Recurrent operators (to come).
