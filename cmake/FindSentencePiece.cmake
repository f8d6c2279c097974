# Finds SentencePiece (Debian's libsentencepiece-dev) and creates SentencePiece::sentencepiece (the processor
# library, with its trainer library, which dtrain's `data train-tokenizer` uses). Honors SENTENCEPIECE_HOME.
find_path(SentencePiece_INCLUDE_DIR sentencepiece_processor.h HINTS $ENV{SENTENCEPIECE_HOME} PATH_SUFFIXES include)
find_library(SentencePiece_LIBRARY NAMES sentencepiece HINTS $ENV{SENTENCEPIECE_HOME} PATH_SUFFIXES lib lib64)
find_library(SentencePiece_TRAIN_LIBRARY NAMES sentencepiece_train HINTS $ENV{SENTENCEPIECE_HOME}
  PATH_SUFFIXES lib lib64)
include(FindPackageHandleStandardArgs)
find_package_handle_standard_args(SentencePiece
  REQUIRED_VARS SentencePiece_LIBRARY SentencePiece_TRAIN_LIBRARY SentencePiece_INCLUDE_DIR)
# libsentencepiece.so carries its own copy of protobuf-lite and exports its symbols: a program that loads it before
# libprotobuf.so gets sentencepiece's copies, and libprotobuf crashes in its static initialisation. So the target is
# an interface library that also puts libprotobuf among the link options, which come before every library on the
# link line: libprotobuf is then loaded (DT_NEEDED) before libsentencepiece.
if(SentencePiece_FOUND AND NOT TARGET SentencePiece::sentencepiece)
  add_library(SentencePiece::sentencepiece INTERFACE IMPORTED)
  set_target_properties(SentencePiece::sentencepiece PROPERTIES INTERFACE_INCLUDE_DIRECTORIES "${SentencePiece_INCLUDE_DIR}"
    INTERFACE_LINK_LIBRARIES "protobuf::libprotobuf;${SentencePiece_LIBRARY};${SentencePiece_TRAIN_LIBRARY}"
    INTERFACE_LINK_OPTIONS "-Wl,--no-as-needed;$<TARGET_FILE:protobuf::libprotobuf>")
endif()
