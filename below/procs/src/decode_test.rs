use crate::decode::*;
