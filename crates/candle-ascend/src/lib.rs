//! Candle on Huawei Ascend NPUs through ACL and aclnn (work in progress: see issue 5).
