# Finds SentencePiece (Debian's libsentencepiece-dev) and creates SentencePiece::sentencepiece (the processor
# library, with its trainer library, which dtrain's `data train-tokenizer` uses). Honors SENTENCEPIECE_HOME.
find_path(SentencePiece_INCLUDE_DIR sentencepiece_processor.h HINTS $ENV{SENTENCEPIECE_HOME} PATH_SUFFIXES include)
find_library(SentencePiece_LIBRARY NAMES sentencepiece HINTS $ENV{SENTENCEPIECE_HOME} PATH_SUFFIXES lib lib64)
find_library(SentencePiece_TRAIN_LIBRARY NAMES sentencepiece_train HINTS $ENV{SENTENCEPIECE_HOME}
  PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY SentencePiece_INCLUDE_DIR)
if(SentencePiece_FOUND AND NOT TARGET SentencePiece::sentencepiece)
  add_library(SentencePiece::sentencepiece UNKNOWN IMPORTED)
  set_target_properties(SentencePiece::sentencepiece PROPERTIES IMPORTED_LOCATION "${SentencePiece_LIBRARY}"
    INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "${SentencePiece_TRAIN_LIBRARY}")
endif()
