//! Texts many holders repeat (pool names, schedule lines, zones), kept
//! once: a holder of a million jobs stores a pointer per job, not a copy.

use std::collections::HashSet;
use std::sync::Arc;

/// One allocation per distinct text seen; grows with the distinct texts.
#[derive(Debug, Default)]
pub struct SharedTexts {
    texts: HashSet<Arc<str>>,
}

impl SharedTexts {
    /// `text`, shared with every earlier call with the same text.
    pub fn share(&mut self, text: &str) -> Arc<str> {
        if let Some(shared) = self.texts.get(text) {
            return Arc::clone(shared);
        }
        let shared: Arc<str> = Arc::from(text);
        self.texts.insert(Arc::clone(&shared));
        shared
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn equal_texts_share_one_allocation() {
        let mut texts = SharedTexts::default();
        let a = texts.share("default");
        let b = texts.share("default");
        assert!(Arc::ptr_eq(&a, &b));
        assert!(!Arc::ptr_eq(&a, &texts.share("other")));
    }
}
